"""The training chain (task=chain): stages that are ordinary lazymem runs, scheduled as Ray tasks, recorded
in chain.json with a fingerprint each, resumed stage by stage."""
