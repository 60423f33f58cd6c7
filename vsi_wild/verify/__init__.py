"""The verification app (`vsi-wild verify`): people check and correct one video's metadata and
questions in a browser, and the app writes the same fix files the pipeline consumes.

``catalog`` reads the store (the current output of a stage for a unit is its status row's key),
``masks`` serves one timestamp's segmentation masks, ``fixfile`` saves fix files (validated by the
pipeline's own code, atomically, with history and hand-written comments kept), ``progress`` keeps
what a reviewer marked as verified, ``server`` is the FastAPI app and ``static/`` its pages.
See docs/verify.md.
"""
