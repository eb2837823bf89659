"""Fleet rollout helpers: the rollout lock, the ansible-playbook wrapper and a test fleet of
Docker-in-Docker nodes with a local registry (for CI and demos on one machine)."""
