"""Where offline real data come from (PyPI releases, Debian packages) and how
official files are downloaded."""
