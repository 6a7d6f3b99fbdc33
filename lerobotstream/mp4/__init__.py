"""MP4 (ISO/IEC 14496-12) sample tables, index, spans and mini-MP4 synthesis.

Internal: nothing is exported here; each name is imported from its own module (``parse``,
``spans``, ``synth``, ``framing``, ``_index_file``, ``_npz_schema``, ``_tolerance``, ...).
"""

__all__: list[str] = []
