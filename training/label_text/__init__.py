"""Training of the label-text stage: the dual encoder, then the fusion fitted on held-out documents."""
