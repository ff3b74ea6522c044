"""Model-quality signals per version, served or shadowed as a candidate: are its outputs
still distributed as they were when it went live?

``stats`` holds the pure two-sample statistics (MMD with a Gaussian kernel and a
permutation p-value for embeddings, Kolmogorov–Smirnov for rerank scores),
``sample`` the bounded per-version samples (a reference, then a window of recent
rows), ``references`` the stored references (first writer wins, shared by every
gateway), and ``monitor`` the piece a gateway holds: it samples served outputs (and
shadow copies', under the candidate's version) on the request path and evaluates the
statistics in the background. See docs/quality.md.
"""
