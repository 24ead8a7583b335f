"""Start, watch and stop a cluster's tasks: launch.Cluster, the ways a task starts (launchers),
the live view of a running cluster, and preparing real nodes (nodes)."""
