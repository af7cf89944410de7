"""Digests: a result store in one small JSON file, and the results read back from several.

A device machine's result store is lost when its session ends; what comes back is a digest
(`flashprobe digest STORE OUT.json`), per cell its meta, config, summary, a thinned loss curve,
the attention and spectral records and, for a replayed run, its δ replay (the format:
digest.schema). `flashprobe digest-report` pools the digests of several sessions, one run per
(suite, variant, grid point, seed) (digest.pooling), and reports the training outcomes and the
control check (digest.outcomes) against a reference (digest.reference), the paper's mechanism
metrics (digest.rise: which layer's W_Q / W_K spectral norm rises first; digest.attention: tie
and P̄ = 1 counts, max logits; digest.replay: the δ error's sign, t and running sum) as tables
(digest.report builds them, digest.tables renders them) and figures (digest.figures).

    writer      store → digest file
    schema      the format, its versions, and the Digest / DigestCell it is read into
    loader      a digest file of any version read and its fields' types checked
    replay      a run's δ replay: replay.json → compact digest form, and back
    pooling     one run per (suite, variant, point, seed) over several digests
    outcomes    diverged / not diverged / no outcome per seed, per variant, at a horizon;
                the control check at twice the reference's median divergence step
    reference   the reference's runs of a suite, or of another suite of the same regime
    rise        per-layer spectral norm trajectories and the rise rule
    attention   per-layer max logit, tie and P̄ = 1 counts
    report      one report per suite: outcomes, controls, ranking, rises, attention, notes
    tables      the reports as tables (markdown, text, JSON)
    figures     the PNG figures (matplotlib)
"""
