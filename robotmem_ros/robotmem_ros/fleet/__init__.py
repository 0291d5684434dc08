"""
Fleet memory: share what one robot learns with the others through a PostgreSQL + pgvector hub.

Optional (``pip install robotmem_ros[fleet]``, requirements/fleet.txt): the engine never imports
this package, and only the modules that talk to the hub import psycopg. The local SQLite store
stays the robot's memory; the hub is a meeting point (docs/fleet.md).
"""
