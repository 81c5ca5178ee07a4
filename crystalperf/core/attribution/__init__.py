"""Stage 2, attribution: every operation's <cpu, disk, network, waiting> vector (``attribute``), from what was
measured (``measurement``; the byte counters' bandwidths, ``observed``), thread states and plumbing frames
(``waiting``), and the classifiers (``classify``) on the code and docs of the sampled frames (``sources``),
aggregated per operation (``vectors``)."""
