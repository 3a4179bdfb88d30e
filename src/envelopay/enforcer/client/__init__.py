"""What talks to the enforcer process from outside: the HTTP clients (sends, payments),
the agents' MCP front, and the payer that pays through the enforcer."""
