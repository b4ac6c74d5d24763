"""What a notebook run needs around its lesson: ``env`` (device, scale, seeding, versions, quiet logs), ``sizes``
(every notebook's sizes at each scale), ``results`` (the results table, results.json, figures), ``checks`` (a
lesson's claims as data), ``display`` (tables for a person), ``panels`` (the ipywidgets panel that re-runs an
experiment), ``tensorboard`` (logging and the inline view), ``reference`` (a reference GPU's run beside the
reader's) and ``budget`` (a notebook's time guard)."""
