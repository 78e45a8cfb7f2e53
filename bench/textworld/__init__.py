"""TextWorldExpress games (a third party's seeded text games) through the four conditions.

Needs the ``textworld`` extra (``pip install -e '.[textworld]'``) and a Java runtime; see
:mod:`bench.textworld.run`.
"""
