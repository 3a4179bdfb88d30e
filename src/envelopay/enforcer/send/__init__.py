"""The send side: an agent's message checked against its policy and caps, queued for
approval or delivered (`enforcer.Enforcer`), on SQLite or PostgreSQL (`store`)."""
