// Training engine (src/engine/): see docs/ARCHITECTURE.md.
