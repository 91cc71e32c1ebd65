"""Reading runs back: ``bayesx report``'s tables, ``bayesx compare``, a sweep's summary."""
