"""How the executor and the agents reach each other: STOMP over the broker."""
