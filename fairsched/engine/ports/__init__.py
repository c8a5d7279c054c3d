"""What the live scheduler talks to: the ports (``protocols``) and their real sides, the clock,
store and publisher (``real``), Temporal (``temporal``), Redis: the lease, the notifications
and the previews (``redis``, over ``lease``, the lease itself). The package's docstring only:
import each name from its module.
"""
