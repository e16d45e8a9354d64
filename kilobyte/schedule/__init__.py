"""Schedule stage: Graph -> Plan — execution order, in-place rules, patch stage, scratch and arena offsets."""
