"""The AgentMail vendor, in one room: its REST client, the inbox as a Transport, the inbox
read by webhook and polling, the webhook's signatures and endpoint.

    client     AgentMailClient (REST, httpx), AgentMailConfig, AgentMailError
    webhook    Svix signatures verified, events read
    transport  AgentMailTransport: our composed message out (the Transport seam)
    inbox      AgentMailInbox: raw MIME in, labelled and recorded
    server     the loopback webhook endpoint (aiohttp)
    serve      an inbox served: webhook and/or polling; how outcomes are labelled

The node reads the `[transport] kind = "agentmail"` settings from its config
(`envelopay.node.agentmail`).
"""
