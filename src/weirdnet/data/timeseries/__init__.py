"""UEA/UCR time-series classification and the ``.ts`` file parser."""
