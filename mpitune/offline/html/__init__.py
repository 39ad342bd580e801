"""The interactive HTML report (``report CACHE --html OUT``) and its live view (``watch CACHE --html``),
and the static page of one kernel's files of several device models (``report FILE FILE --html``).

view.py reads the loader's tables into what the charts need. charts.py and timeline.py draw
them as plotly figures. payload.py gathers the page's content as JSON. page.py assembles one
self-contained page. server.py serves it live on loopback, rereading the file as it grows.
across.py writes the several models' comparison as plain tables, without plotly.
"""
