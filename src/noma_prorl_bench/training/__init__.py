"""Training: the trainer loop, the reset / drift-monitor / growth managers, optimizer-state
transforms, growth with state migration, and the NaN and signal guards."""
