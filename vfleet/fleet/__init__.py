"""Fleet rollout helpers for real fleets: the ansible-playbook wrapper and the role defaults it reads.
The Docker-in-Docker test fleet lives in lab."""
