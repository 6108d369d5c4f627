"""Training: the trainer loop, reset / monitor / growth managers, optimizer-state transforms, guards."""
