"""Repairs that change the fabric: the loop for a bad cable (`cables`: its ports disabled from a host, read back,
recorded, rechecked). Kept apart from `provision.network`, which only reads, so readers can never reach it.
"""
