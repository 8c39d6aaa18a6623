"""Helpers shared by the test modules (no test module imports another one):

    numerics  relative errors, random log-weights and padding masks
    scan      random scan inputs and where the scan's outputs are defined
    mixers    the checks every mixer's tests run (reference, padding, causality,
              decoding, errors, linear memory in a child process)
    train     small training configs, datasets and the CLI in a subprocess
    archives  small zip/tar archives in the layout of the real data sources
    docs      the records' folder, a page's section, its tables, links and numbers
"""
