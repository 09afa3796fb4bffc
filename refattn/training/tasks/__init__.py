"""Data for the experiments, generated or read from a path the user gives.

* :mod:`refattn.training.tasks.nt` -- Expressive's NT, NT-S and NT-R symbol series and
  their cycle structure;
* :mod:`refattn.training.tasks.polarity` -- TanhMax's and Sun & Lu's synthetic polarity
  sentences, and the token polarity gamma_e of TanhMax Eq. 11;
* :mod:`refattn.training.tasks.sst2` -- a reader for SST-2 in GLUE's TSV format (never
  downloaded; the user passes the folder).
"""
