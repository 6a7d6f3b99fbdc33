"""Build the Cython extensions of lerobotstream.

Every ``lerobotstream/**/*.pyx`` becomes an extension module. A module's C helpers are named in
its own header with a ``# distutils: sources = csrc/a.c csrc/b.c`` line, so adding a module never
needs an edit here. There is no pure-Python fallback: a failed compile fails the install.

Set ``LEROBOTSTREAM_CYTHON_DEBUG=1`` to build with ``boundscheck`` on (slower, for debugging).
"""

import os
from pathlib import Path

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = Path(__file__).parent.resolve()
DEBUG = os.environ.get("LEROBOTSTREAM_CYTHON_DEBUG", "") == "1"

COMPILER_DIRECTIVES = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": False,
    "initializedcheck": DEBUG,
    "nonecheck": False,
    # Python semantics for // and % : tick math divides negative numbers (ctts v1, edit media_time).
    "cdivision": False,
    "embedsignature": True,
}


def _extensions() -> list[Extension]:
    exts = []
    for pyx in sorted((HERE / "lerobotstream").rglob("*.pyx")):
        rel = pyx.relative_to(HERE)
        modname = ".".join(rel.with_suffix("").parts)
        exts.append(
            Extension(
                modname,
                [str(rel)],
                include_dirs=[np.get_include(), "csrc"],
                define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
                extra_compile_args=["-O2", "-Wno-unused-function"] + (["-O0", "-g"] if DEBUG else []),
            )
        )
    return exts


setup(
    ext_modules=cythonize(
        _extensions(),
        compiler_directives=COMPILER_DIRECTIVES,
        nthreads=int(os.environ.get("LEROBOTSTREAM_BUILD_JOBS", "2")),
    ),
)
