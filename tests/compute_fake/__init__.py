"""A fake of GCE's control plane for one regional managed instance group: the Compute API (REST v1)
on loopback, answering the real API's documented response shapes.

``group`` holds the state (a timeline on the test's clock, which a resize changes), ``shapes`` the
answers, each citing its reference page, ``server`` the routes, and ``clock`` the virtual clock.
"""
