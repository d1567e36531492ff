"""The packet engine's network elements: packets, ports, switches, NICs, senders, NVLink domains, PFC."""
