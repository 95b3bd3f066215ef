"""`bertfit distill`: a fine-tuned run (the teacher) labels the training texts, and any unlabelled
ones, with its probabilities; a smaller student run learns from them (`bertfit.distill.run`)."""
