"""Training: the trainer loop, reset / monitor / growth managers, optimizer-state transforms, guards,
and the NOMA training-state interchange (interchange.py)."""
