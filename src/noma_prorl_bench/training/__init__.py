"""Training: the trainer loop and the Learner stage, reset / monitor / growth managers, optimizer-state transforms, guards,
and the NOMA training-state interchange (interchange.py)."""
