"""Set-up tools, apart from the lessons.

- ``devsetup``    JupyterLab defaults and the browser for the real-browser test (``make setup``)
- ``wheelhouse``  the wheels for an offline install (``make wheelhouse``)
"""
