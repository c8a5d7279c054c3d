from django.urls import path

from charts import views

app_name = "charts"
urlpatterns = [
    path("new/", views.chart_new, name="new"),
]
