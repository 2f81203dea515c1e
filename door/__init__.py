"""The front door: the single server's HTTPS endpoint on Cloud Run (docs/door.md).

It checks the API key before anything else, wakes the server's managed instance group when a request
finds it at size 0 and holds the request through the cold start, proxies to the current member's
internal IP, grants the VM's idle stop only while it holds and streams nothing, and records per
request figures for Cloud Monitoring. Pure Python (``door/requirements.txt``): it is deployed as a
source archive on a Google base image, without a container build (``infra/door_archive.py``). It
imports no other room of the project.
"""
