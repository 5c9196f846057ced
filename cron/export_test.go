package cron

var (
	ExportDaysFromCivil = daysFromCivil
	ExportYearOf        = yearOf
	ExportWeekday       = weekday
)
