// Links the interposer with a DT_NEEDED entry for the next driver; never loaded at run time.
