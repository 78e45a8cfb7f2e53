"""The read-only web console at ``/ui/``: trajectories with their credit, the experience library,
long-term memory. :mod:`~cluster.console.reads` reads the stores for one owner,
:mod:`~cluster.console.routes` serves the page and its JSON."""
