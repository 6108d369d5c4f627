"""noma_prorl_bench: a harness for KL-regularised RL post-training of language models.

It makes three things measurable and switchable: the cost of the reference forward
(A0 naive_epoch / A1 cached / A2 ring / B no reference), the semantics of a reference
reset (which policy becomes the reference and what happens to the optimizer), and
topology growth (adapter rank growth with optimizer-state migration).
"""

__version__ = "0.1.0"
