"""Training: the trainer loop, the Learner stage, reset / monitor / growth managers, guards,
optimizer-state transforms and the NOMA training-state interchange (interchange.py)."""
