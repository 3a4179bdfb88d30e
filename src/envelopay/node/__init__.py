"""A running agent: its config, keys and transports, wired to an engine and served.

    agent_node.py  AgentNode (receive, send, drain) and build_node(config)
    transports.py  the garden's LMTP and SMTP submission, behind engine.transport
    runtime.py     pumps: a Maildir into a node, responders, call replies
    serve.py       serve_worker: the `envelopay agent serve` loop
    init.py        init_agent: a fresh agent directory (config, keys)
    keys.py        key generation and the key files
    agent_mailbox.py  which mailbox the front ends open (--dir, --address, the config)
"""
