"""The local cloud: N PostgreSQL clusters (one per machine), a catalog cluster and an ActiveMQ
broker, all on this box, started and stopped by SMILE itself (`smile cloud up|status|down`)."""
