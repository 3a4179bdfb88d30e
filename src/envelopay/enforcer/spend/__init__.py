"""The spend side: payment intents checked against the spend policy, paid from the sealed
wallet (`vault`) at most once, and their PAY sent through the send side's public API."""
