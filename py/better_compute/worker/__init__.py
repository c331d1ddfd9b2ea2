"""The worker (docs/architecture.md §2, §9): `runtime` runs the work queue with handlers it is given (P10);
`handlers` holds the first handlers, which the composition root (`better-compute serve worker`) passes in."""
