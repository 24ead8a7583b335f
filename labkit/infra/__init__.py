"""Infrastructure on one machine: emulated network links and CloudLab nodes (namespaces), a Slurm the
kit owns, and Slurm as the kit uses it."""
