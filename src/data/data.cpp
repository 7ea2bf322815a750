// Data pipeline (src/data/): see docs/ARCHITECTURE.md.
