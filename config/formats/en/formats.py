"""One time format everywhere: 24 h ("14:05"), as the dashboard's pages show it.

Django's English locale would write "2:05 p.m." in the admin's lists; this module
(``FORMAT_MODULE_PATH``) overrides the formats that carry a time of day.
"""
DATETIME_FORMAT = "M j, Y, H:i"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
TIME_FORMAT = "H:i"
