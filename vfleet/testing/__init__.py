"""The Docker-in-Docker test fleet and the fake images: what the tests, the benchmarks and
`vfleet fleet up` (`make fleet-up`) start on one machine to try a rollout without a real fleet. A real
fleet's rollout uses none of it (that is vfleet.fleet). stages.py runs the project's test tiers for
`make test`."""
