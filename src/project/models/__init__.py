"""Plain nn.Modules. No Lightning in here: a net is usable in any loop. forward returns logits.

One module per net, named by its module in configs (`project.models.digits_cnn.DigitsCNN`): this
face imports none of them, so deleting one leaves the others importable.
"""
