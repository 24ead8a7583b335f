"""What the launcher and the tasks agree on: the cluster spec (TF_CONFIG), task files and exit codes,
typed events, what a run left, and faults read from a chief's log. No processes start here."""
