"""The built-in families, one package each: ``memlab/families/<name>/`` holds the family's workload,
its techniques and peers, the operations only it uses, and its metadata (``meta.py``: colours,
held-out time settings, the asv benchmark grid).  The registry finds the packages by a directory
scan (:func:`memlab.registry.builtin_modules`); nothing lists them.  The modules beside the packages
(``seeding``, ``peer_versions``) are helpers more than one family uses."""
