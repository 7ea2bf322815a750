// Models (models/): see docs/ARCHITECTURE.md.
