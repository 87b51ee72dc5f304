"""The panel-of-experts study (seed 000, Part I): its protocol and its published records."""
