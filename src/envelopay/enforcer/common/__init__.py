"""What the enforcer's send and spend sides both stand on: the state-table form, a store
batch, the SQLite WAL checkpointer, the wallet and liveness locks."""
