"""Offline training of the pair verifier: labelled-pair generator, training, evaluation.
Nothing here runs in the gateway; `cache/pair_model.py` loads what `train.py` wrote."""
