"""The training chain (task=chain): stages that are ordinary lazymem runs, scheduled as Ray tasks, recorded
in chain.json with one StageRecord each, resumed stage by stage. driver.py runs a chain from its settings;
what it needs to know of a stage's task comes from the task registry, which its caller passes in."""
