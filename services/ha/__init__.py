"""The HA-algorithms paper (ICDE 2005): operator classes, and the amnesia, passive standby, active standby and upstream backup schemes."""
