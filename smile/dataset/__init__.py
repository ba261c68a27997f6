"""The evaluation dataset (paper §9.1): raw tweet-like events generated and unpacked on Spark into
the nine base relations, loaded onto the machines per a placement."""
