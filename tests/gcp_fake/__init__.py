"""A fake of the Google APIs the preflight reads (``python -m qwen36 check``), served on loopback.

``project`` holds one project's state (APIs, billing, quotas, zones, images, org policies, the caller's
permissions), ``shapes`` the answers, each in its method's documented shape and citing its reference
page, and ``server`` the routes: the OAuth token endpoint (so google-auth's own refresh runs), Service
Usage, Cloud Billing, Compute Engine (to the real google-cloud-compute client), the Organization Policy
API v2 and Cloud Resource Manager. Every request is recorded.
"""
